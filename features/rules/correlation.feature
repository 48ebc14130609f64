@needs:topics
Feature: Correlation filters
  A correlation filter names properties and the values they must have; all must match, and
  strings compare case-sensitively.

  @RULES-CORR-001
  Scenario: A correlation filter on the correlation id
    Given a topic "t" with subscriptions "s"
    And "t/Subscriptions/s" has only the rule "c" with correlation filter correlation id "order-1"
    When message "hit" with correlation id "order-1" is sent to "t"
    And message "miss" with correlation id "order-2" is sent to "t"
    And message "none" is sent to "t"
    Then peeking "t/Subscriptions/s" shows "hit"

  @RULES-CORR-001
  Scenario Outline: A correlation filter on each system property it may name
    Given a topic "t" with subscriptions "s"
    And "t/Subscriptions/s" has only the rule "c" with correlation filter <property> "x1"
    When message "hit" with <attribute> "x1" is sent to "t"
    And message "miss" with <attribute> "x2" is sent to "t"
    Then peeking "t/Subscriptions/s" shows "hit"

    Examples:
      | property            | attribute        |
      | label               | label            |
      | to                  | to               |
      | reply to            | reply to         |
      | reply to session id | reply to session |
      | content type        | content type     |
      | session id          | session          |

  @RULES-CORR-001
  Scenario: A correlation filter on the message id
    Given a topic "t" with subscriptions "s"
    And "t/Subscriptions/s" has only the rule "c" with correlation filter message id "wanted"
    When messages "wanted", "other" are sent to "t"
    Then peeking "t/Subscriptions/s" shows "wanted"

  @RULES-CORR-001
  Scenario: A correlation filter on user properties of several types
    Given a topic "t" with subscriptions "s"
    And "t/Subscriptions/s" has only the rule "c" with correlation filter properties "region" = "eu" and "priority" = 3 and "urgent" = true
    When message "hit" with properties "region" = "eu" and "priority" = 3 and "urgent" = true is sent to "t"
    And message "wrong-number" with properties "region" = "eu" and "priority" = 4 and "urgent" = true is sent to "t"
    And message "wrong-flag" with properties "region" = "eu" and "priority" = 3 and "urgent" = false is sent to "t"
    Then peeking "t/Subscriptions/s" shows "hit"

  @RULES-CORR-002
  Scenario: Every property a correlation filter names must match
    Given a topic "t" with subscriptions "s"
    And "t/Subscriptions/s" has only the rule "c" with correlation filter label "red" and correlation id "high" and property "shop" = "north"
    When message "all" with label "red", correlation id "high" and property "shop" = "north" is sent to "t"
    And message "two-of-three" with label "red" and correlation id "high" is sent to "t"
    And message "wrong-label" with label "blue", correlation id "high" and property "shop" = "north" is sent to "t"
    Then peeking "t/Subscriptions/s" shows "all"

  @RULES-CORR-003
  Scenario: Correlation filters compare strings case-sensitively
    Given a topic "t" with subscriptions "s"
    And "t/Subscriptions/s" has only the rule "c" with correlation filter label "Red" and property "shop" = "North"
    When message "exact" with label "Red" and property "shop" = "North" is sent to "t"
    And message "lower-label" with label "red" and property "shop" = "North" is sent to "t"
    And message "lower-value" with label "Red" and property "shop" = "north" is sent to "t"
    Then peeking "t/Subscriptions/s" shows "exact"
